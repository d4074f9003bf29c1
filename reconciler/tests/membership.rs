//! Memberships, enrollment and revocation end to end through `gridctl`, with the
//! certificates checked by an independent verifier (`openssl verify`): a participant
//! certificate chains to its own membership's authority and to no other; after
//! `revoke`, the revocation list every member loads rejects the revoked participant
//! and still accepts the others. Plans show each step as an explicit transition and
//! are empty after.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn work() -> PathBuf {
    common::work_dir("membership")
}

use common::gridctl;

/// `gridctl reconcile t.kdl`'s exit code.
fn reconcile_code(dir: &Path) -> Option<i32> {
    common::gridctl_code(dir, &["reconcile", "t.kdl"]).0
}

fn plan_counts(dir: &Path) -> serde_json::Value {
    let (ok, text) = gridctl(dir, &["plan", "t.kdl", "--json"]);
    assert!(ok, "{text}");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    plan["counts"].clone()
}

/// `openssl verify`: Ok(()) when the certificate verifies, Err(output) otherwise.
fn verify(dir: &Path, ca: &str, certificate: &str, crl: Option<&str>) -> Result<(), String> {
    let mut command = Command::new("openssl");
    command.current_dir(dir).arg("verify");
    if let Some(crl) = crl {
        command.args(["-crl_check", "-CRLfile", crl]);
    }
    let output = command
        .args(["-CAfile", ca, certificate])
        .output()
        .expect("openssl is installed (see .ci/run)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(())
    } else {
        Err(text)
    }
}

#[test]
fn enrollment_and_revocation_verify_with_openssl() {
    let dir = work();
    let topology = |revoke: &str| {
        format!(
            "grid version=1\nmembership ops {{ {revoke} }}\nmembership other\n\
             host a listen=\"127.0.0.1:7621\" {{ member ops; }}\n\
             host b listen=\"127.0.0.1:7622\" {{ member ops; member other; }}\n"
        )
    };
    std::fs::write(dir.join("t.kdl"), topology("")).unwrap();
    // The whole plan: authorities and installations, then the enrollments after them
    // (they need the keys), applied in one reconcile.
    assert_eq!(plan_counts(&dir)["+"], 7);
    let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{text}");
    let counts = plan_counts(&dir);
    assert_eq!(
        (
            counts["+"].as_u64(),
            counts["~"].as_u64(),
            counts["-"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );

    let ops_ca = "state-ca-ops.pem";
    std::fs::copy(
        dir.join("grid-state/memberships/ops/ca.pem"),
        dir.join(ops_ca),
    )
    .unwrap();
    let other_ca = "grid-state/memberships/other/ca.pem";
    let a = "grid-state/hosts/a/memberships/ops/participant.pem";
    let b_ops = "grid-state/hosts/b/memberships/ops/participant.pem";
    let b_other = "grid-state/hosts/b/memberships/other/participant.pem";
    verify(&dir, ops_ca, a, None).unwrap();
    verify(&dir, ops_ca, b_ops, None).unwrap();
    verify(&dir, other_ca, b_other, None).unwrap();
    assert!(
        verify(&dir, other_ca, a, None).is_err(),
        "another authority must not vouch for a"
    );

    // The host's status names its memberships and participant.
    let (ok, text) = gridctl(&dir, &["status", "--host", "b", "--json"]);
    assert!(ok, "{text}");
    let status: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status["name"], "b");
    let memberships: Vec<(String, String)> = status["memberships"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["membership"].as_str().unwrap().to_owned(),
                m["participant"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        memberships,
        vec![("ops".into(), "b".into()), ("other".into(), "b".into())]
    );

    // Reconciling again issues nothing new (the hosts do not run: their `!` lines
    // remain, exit 6).
    let serial_before = std::fs::read(dir.join(a)).unwrap();
    assert_eq!(reconcile_code(&dir), Some(6));
    assert_eq!(
        std::fs::read(dir.join(a)).unwrap(),
        serial_before,
        "no second certificate"
    );

    // Revoking a: an explicit `-` transition, the list distributed to b.
    std::fs::write(dir.join("t.kdl"), topology("revoke a;")).unwrap();
    let counts = plan_counts(&dir);
    assert_eq!(counts["-"], 1);
    assert_eq!(counts["~"], 1, "b loads the new revocation list");
    // Applied; a's revoked enrollment and the stopped hosts stay `!` lines (exit 6).
    assert_eq!(reconcile_code(&dir), Some(6));
    let crl = "grid-state/hosts/b/memberships/ops/crl.pem";
    let refused = verify(&dir, ops_ca, a, Some(crl)).unwrap_err();
    assert!(refused.contains("certificate revoked"), "{refused}");
    verify(&dir, ops_ca, b_ops, Some(crl)).unwrap();

    // A revoked participant is never enrolled again; the plan says why and changes nothing.
    let (ok, text) = gridctl(&dir, &["plan", "t.kdl"]);
    assert!(ok);
    assert!(text.contains("is revoked in ops"), "{text}");
    let counts = plan_counts(&dir);
    assert_eq!(
        (
            counts["+"].as_u64(),
            counts["~"].as_u64(),
            counts["-"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Answers are signed by their owner and verify offline with its public keys — also
/// after the owner is revoked from its membership and after its signing key rotated
/// (the retired key still verifies what it signed; new answers use the new key).
#[test]
fn answers_signed_before_revocation_and_rotation_still_verify() {
    let dir = common::work_dir("signed");
    let topology = |membership: &str, keys: &str| {
        format!(
            "grid version=1\n{membership}\nhost s listen=\"127.0.0.1:7671\" {{ member ops; {keys} }}\n\
             model counter host=s {{ input n default=0; cell twice \"n * 2\"; }}\n"
        )
    };
    std::fs::write(dir.join("t.kdl"), topology("membership ops", "")).unwrap();
    // Installation, keys and certificate; the model waits for s to run (exit 5).
    assert_eq!(reconcile_code(&dir), Some(5));
    let host_dir = dir.join("grid-state/hosts/s");
    let mut host = common::KillOnDrop(
        Command::new(common::gridd())
            .arg("--dir")
            .arg(&host_dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_ready(&mut host.0, &host_dir).expect("gridd starts");
    let verified = |op: &str| -> Option<u64> {
        let (ok, text) = gridctl(&dir, &["verify", "--host", "s", "--op", op, "--json"]);
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(ok, report["verified"].as_bool().unwrap());
        report["generation"].as_u64()
    };
    assert!(gridctl(&dir, &["reconcile", "t.kdl"]).0); // installs counter
    assert!(gridctl(&dir, &["input", "counter", "n=3", "--op", "b1"]).0);
    assert_eq!(verified("b1"), Some(1));

    // Revoked from its membership: what it signed before still verifies.
    std::fs::write(
        dir.join("t.kdl"),
        topology("membership ops { revoke s; }", ""),
    )
    .unwrap();
    // Applied; `s`'s revoked enrollment stays a `!` line (exit 6).
    assert_eq!(reconcile_code(&dir), Some(6));
    assert_eq!(verified("b1"), Some(1));

    // Rotated to generation 2: b1 verifies with the retired key, b2 with the new one.
    std::fs::write(
        dir.join("t.kdl"),
        topology("membership ops { revoke s; }", "keys generation=2;"),
    )
    .unwrap();
    assert_eq!(reconcile_code(&dir), Some(6)); // rotated; s's revoked enrollment stays `!`
    assert_eq!(verified("b1"), Some(1));
    assert!(gridctl(&dir, &["input", "counter", "n=4", "--op", "b2"]).0);
    assert_eq!(verified("b2"), Some(2));

    drop(host);
    std::fs::remove_dir_all(&dir).unwrap();
}
