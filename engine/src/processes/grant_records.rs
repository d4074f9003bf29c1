//! How a grant is kept in the host's store: its account in `process-grants` (rewritten
//! by every run that reserves, consumes or releases one of its units) and each of its
//! signed issues once, in `process-signed-grants` under `NAME \0 SERIAL(be32)`, written
//! in the write that issues it and never again.
//!
//! Before, the account carried every signed issue, so each run's write grew with the
//! grant's top-ups (a grant raised daily held 365 signed issues a year later, re-encoded
//! and journaled twice per run). A store written that way is moved over at its first
//! open, in one synced write; the account in memory ([`GrantView::issued`]) is as before.
//!
//! At open the issues are checked against the accounts: serials 1, 2, … without a gap,
//! each naming its grant, issuer and caller, and (but for a mission's allocation, which
//! is issued no units) adding up to the units allocated. A store whose issues do not
//! is refused by name — never a grant whose signed evidence was lost.

use std::collections::BTreeMap;

use fjall::Keyspace;

use super::allocations::is_allocation;
use super::api::{GrantView, SignedGrant};
use crate::store::Durable;

/// A grant's account as `process-grants` keeps it: without its signed issues, which
/// `process-signed-grants` keeps (written once each, by [`signed_key`]).
pub(super) fn grant_record(grant: &mut GrantView) -> Vec<u8> {
    let issued = std::mem::take(&mut grant.issued);
    let record = serde_json::to_vec(&*grant).expect("grants serialize");
    grant.issued = issued;
    record
}

/// The key of a grant's signed issue: `NAME \0 SERIAL(be32)`, so a grant's issues are
/// one range, in serial order.
pub(super) fn signed_key(grant: &str, serial: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(grant.len() + 5);
    key.extend_from_slice(grant.as_bytes());
    key.push(0);
    key.extend_from_slice(&serial.to_be_bytes());
    key
}

/// Gives every grant read from `process-grants` its signed issues from `signed`
/// (moving the issues of an account written with them into `signed`, synced), and
/// checks them. `issuer` is this host.
pub(super) fn attach_signed(
    database: &Durable,
    grants_ks: &Keyspace,
    signed: &Keyspace,
    issuer: &str,
    grants: &mut BTreeMap<String, GrantView>,
) -> Result<(), String> {
    let mut kept: BTreeMap<String, Vec<SignedGrant>> = BTreeMap::new();
    for guard in signed.iter() {
        let (key, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
        let issue: SignedGrant = serde_json::from_slice(&bytes).map_err(|e| {
            format!("a signed grant issue in `process-signed-grants` does not decode: {e}")
        })?;
        if *key != *signed_key(&issue.grant, issue.serial) {
            return Err(format!(
                "signed issue {} of grant `{}` is kept under another grant's or serial's key in `process-signed-grants`: the store is damaged",
                issue.serial, issue.grant
            ));
        }
        kept.entry(issue.grant.clone()).or_default().push(issue);
    }
    let mut write = database.batch();
    let mut moved = false;
    for (name, grant) in grants.iter_mut() {
        let issues = kept.remove(name).unwrap_or_default();
        match (grant.issued.is_empty(), issues.is_empty()) {
            (true, _) => grant.issued = issues,
            (false, true) => {
                // Written before the issues were kept apart: moved over once.
                for issue in &grant.issued {
                    write.insert(
                        signed,
                        signed_key(name, issue.serial),
                        serde_json::to_vec(issue).expect("issues serialize"),
                    );
                }
                write.insert(grants_ks, name.as_str(), grant_record(grant));
                moved = true;
            }
            (false, false) => {
                return Err(format!(
                    "grant `{name}` holds signed issues in its account and in `process-signed-grants` both: the store is damaged"
                ));
            }
        }
        check(issuer, grant)?;
    }
    if let Some(name) = kept.keys().next() {
        return Err(format!(
            "`process-signed-grants` holds signed issues of grant `{name}`, which `process-grants` does not hold: the store is damaged"
        ));
    }
    if moved {
        write
            .commit()
            .and_then(|()| database.persist())
            .map_err(|e| format!("moving grants' signed issues apart: {e}"))?;
    }
    Ok(())
}

/// A grant's signed issues: serials 1, 2, … each naming it, this issuer and its caller,
/// adding up to what it allocated (a mission's allocation is issued nothing).
fn check(issuer: &str, grant: &GrantView) -> Result<(), String> {
    let name = &grant.name;
    for (at, issue) in grant.issued.iter().enumerate() {
        if issue.serial as usize != at + 1 {
            return Err(format!(
                "grant `{name}`'s signed issues skip from serial {at} to {}: the store is damaged",
                issue.serial
            ));
        }
        if issue.grant != *name || issue.issuer != issuer || issue.caller != grant.caller {
            return Err(format!(
                "grant `{name}`'s signed issue {} names grant `{}` from `{}` to `{}`, not this grant's issuer and caller: the store is damaged",
                issue.serial, issue.grant, issue.issuer, issue.caller
            ));
        }
        if issue.membership != grant.membership {
            return Err(format!(
                "grant `{name}`'s signed issue {} serves {}, the grant {}: the store is damaged",
                issue.serial,
                super::grants::serves(issue.membership.as_deref()),
                super::grants::serves(grant.membership.as_deref())
            ));
        }
    }
    let issued = grant
        .issued
        .iter()
        .try_fold(0u64, |sum, issue| sum.checked_add(issue.units));
    if !is_allocation(name) && issued != Some(grant.allocated) {
        return Err(format!(
            "grant `{name}` allocated {} units, but its {} signed issue(s) add up to {}: the store is damaged",
            grant.allocated,
            grant.issued.len(),
            issued.map_or("more than u64".to_owned(), |n| n.to_string())
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::api::GrantIssue;
    use super::super::service::Processes;
    use super::*;
    use std::sync::Arc;

    fn open(dir: &std::path::Path, durable: &Durable) -> Result<Arc<Processes>, String> {
        Processes::open(
            durable,
            dir,
            "site",
            crate::custody::verify(dir).unwrap(),
            crate::store::Failpoints::default(),
            crate::store::shelf::Retention::default(),
        )
    }

    /// `hq`'s grant `g-hq`, issued 5 units and raised by 5.
    fn issued(processes: &Processes) -> GrantView {
        let keys = processes.custody.manifest();
        for before in [0, 5] {
            let issue = GrantIssue {
                name: "g-hq".to_owned(),
                caller: "hq".to_owned(),
                units: 5,
                allocated_before: before,
                caller_keys: keys.clone(),
                mailbox: None,
                membership: None,
            };
            let mut state = processes.lock();
            let mut write = processes.database.batch();
            processes.issue(&mut state, &issue, &mut write).unwrap();
            write.commit().unwrap();
        }
        processes.lock().grants["g-hq"].clone()
    }

    /// A store of its own with `g-hq` issued and raised, and the processes open on it.
    fn issued_store(name: &str) -> (std::path::PathBuf, Durable, Arc<Processes>, GrantView) {
        let (dir, durable, _) = super::super::open::tests::store(name);
        crate::custody::create(&dir).unwrap();
        let processes = open(&dir, &durable).unwrap();
        let grant = issued(&processes);
        (dir, durable, processes, grant)
    }

    fn stored_account(processes: &Processes) -> Vec<u8> {
        processes.ks.grants.get("g-hq").unwrap().unwrap().to_vec()
    }

    fn signed_count(processes: &Processes) -> usize {
        processes.ks.signed_grants.iter().count()
    }

    #[test]
    fn signed_issues_are_kept_once_apart_from_the_account_and_come_back_at_open() {
        let (dir, durable, processes, grant) = issued_store("signed-apart");
        assert_eq!((grant.allocated, grant.issued.len()), (10, 2));
        let account = String::from_utf8(stored_account(&processes)).unwrap();
        assert!(account.contains("\"issued\":[]"), "{account}");
        assert!(!account.contains("signature"), "{account}");
        assert_eq!(signed_count(&processes), 2);
        drop(processes);
        let reopened = open(&dir, &durable).unwrap();
        assert_eq!(reopened.lock().grants["g-hq"], grant, "the same account");
        drop(reopened);
        drop(durable);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_account_written_with_its_signed_issues_is_moved_over_once() {
        let (dir, durable, processes, grant) = issued_store("signed-moved");
        // As a store written before the issues were kept apart holds it.
        let mut write = processes.database.batch();
        write.insert(
            &processes.ks.grants,
            "g-hq",
            serde_json::to_vec(&grant).unwrap(),
        );
        for serial in [1, 2] {
            write.remove(&processes.ks.signed_grants, signed_key("g-hq", serial));
        }
        write.commit().unwrap();
        assert_eq!(signed_count(&processes), 0);
        drop(processes);
        for _ in 0..2 {
            let reopened = open(&dir, &durable).unwrap();
            assert_eq!(reopened.lock().grants["g-hq"], grant);
            assert_eq!(signed_count(&reopened), 2, "moved over");
            let account = String::from_utf8(stored_account(&reopened)).unwrap();
            assert!(!account.contains("signature"), "{account}");
        }
        drop(durable);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lost_stray_or_doubled_signed_issues_refuse_the_open_by_name() {
        let (dir, durable, processes, grant) = issued_store("signed-damaged");
        let (ks_grants, ks_signed) = (
            processes.ks.grants.clone(),
            processes.ks.signed_grants.clone(),
        );
        let kept: Vec<(Vec<u8>, Vec<u8>)> = ks_signed
            .iter()
            .map(|g| {
                let (k, v) = g.into_inner().unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect();
        drop(processes);
        let change = |f: &dyn Fn(&mut fjall::OwnedWriteBatch)| {
            let mut write = durable.batch();
            f(&mut write);
            write.commit().unwrap();
        };
        let restore = || {
            change(&|w| {
                for (k, v) in &kept {
                    w.insert(&ks_signed, k.clone(), v.clone());
                }
                w.remove(&ks_signed, signed_key("ghost", 1));
                w.remove(&ks_signed, signed_key("g-hq", 3));
                let mut account = grant.clone();
                w.insert(&ks_grants, "g-hq", grant_record(&mut account));
            })
        };
        let refused = |expected: &str| {
            let error = open(&dir, &durable).err().expect("the open is refused");
            assert!(error.contains(expected), "{error}");
            restore();
            if let Err(e) = open(&dir, &durable) {
                panic!("restored, it opens: {e}");
            }
        };
        // The raise lost: the first issue adds up to 5 of 10.
        change(&|w| w.remove(&ks_signed, signed_key("g-hq", 2)));
        refused("grant `g-hq` allocated 10 units, but its 1 signed issue(s) add up to 5");
        // The first lost: serial 2 follows nothing.
        change(&|w| w.remove(&ks_signed, signed_key("g-hq", 1)));
        refused("grant `g-hq`'s signed issues skip from serial 0 to 2");
        // An issue of a grant the host does not hold.
        let mut ghost: SignedGrant = serde_json::from_slice(&kept[0].1).unwrap();
        ghost.grant = "ghost".to_owned();
        change(&|w| {
            w.insert(
                &ks_signed,
                signed_key("ghost", 1),
                serde_json::to_vec(&ghost).unwrap(),
            )
        });
        refused("holds signed issues of grant `ghost`, which `process-grants` does not hold");
        // Kept twice: in the account and apart.
        change(&|w| w.insert(&ks_grants, "g-hq", serde_json::to_vec(&grant).unwrap()));
        refused(
            "grant `g-hq` holds signed issues in its account and in `process-signed-grants` both",
        );
        // An issue under another serial's key.
        change(&|w| {
            w.remove(&ks_signed, signed_key("g-hq", 2));
            w.insert(&ks_signed, signed_key("g-hq", 3), kept[1].1.clone());
        });
        refused("is kept under another grant's or serial's key");
        drop(durable);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_grant_serving_one_membership_signs_it_and_never_changes_it() {
        let (dir, durable, _) = super::super::open::tests::store("signed-membership");
        crate::custody::create(&dir).unwrap();
        let processes = open(&dir, &durable).unwrap();
        let manifest = processes.custody.manifest();
        let issue = |before: u64, membership: Option<&str>, mailbox: Option<&str>| GrantIssue {
            name: "g-util".to_owned(),
            caller: "hq".to_owned(),
            units: 5,
            allocated_before: before,
            caller_keys: manifest.clone(),
            mailbox: mailbox.map(|m| super::super::api::MailboxAt {
                host: "box".to_owned(),
                address: "127.0.0.1:1".to_owned(),
                membership: m.to_owned(),
            }),
            membership: membership.map(str::to_owned),
        };
        let apply = |issue: &GrantIssue| {
            let mut state = processes.lock();
            let mut write = processes.database.batch();
            let done = processes.issue(&mut state, issue, &mut write);
            write.commit().unwrap();
            done
        };
        // A mailbox reached in another membership than the grant serves: refused.
        let refused = apply(&issue(0, Some("utility"), Some("plant-ops"))).unwrap_err();
        assert!(
            refused.contains(
                "serves membership `utility`, but its mailbox `box` is reached in `plant-ops`"
            ),
            "{refused}"
        );
        assert!(
            !processes.lock().grants.contains_key("g-util"),
            "nothing issued"
        );
        apply(&issue(0, Some("utility"), Some("utility"))).unwrap();
        // A raise under another membership, or none: refused, nothing issued.
        for other in [Some("plant-ops"), None] {
            let refused = apply(&issue(5, other, None)).unwrap_err();
            assert!(
                refused.contains("a grant never changes its membership"),
                "{refused}"
            );
        }
        let grant = processes.lock().grants["g-util"].clone();
        assert_eq!((grant.allocated, grant.issued.len()), (5, 1));
        assert_eq!(grant.membership.as_deref(), Some("utility"));
        // The membership is signed: the issue verifies, and not with another one.
        let mut signed = grant.issued[0].clone();
        assert_eq!(signed.membership.as_deref(), Some("utility"));
        assert!(signed.verify(&manifest));
        signed.membership = Some("plant-ops".to_owned());
        assert!(
            !signed.verify(&manifest),
            "another membership does not verify"
        );
        signed.membership = None;
        assert!(!signed.verify(&manifest), "nor none");
        // An account whose membership was changed in the store: refused at open.
        let ks = processes.ks.grants.clone();
        drop(processes);
        let mut widened = grant.clone();
        widened.membership = None;
        let mut write = durable.batch();
        write.insert(&ks, "g-util", grant_record(&mut widened));
        write.commit().unwrap();
        let error = open(&dir, &durable).err().expect("the open is refused");
        assert!(
            error.contains("grant `g-util`'s signed issue 1 serves membership `utility`, the grant any membership"),
            "{error}"
        );
        drop(durable);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
