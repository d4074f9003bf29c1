//! Custody's unit tests: key files, verification, rotation, peers' keys.
use super::*;

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grid-custody-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn created_keys_verify_and_replaced_or_missing_keys_refuse() {
    let d = dir("verify");
    let manifest = create(&d).unwrap();
    assert_eq!(manifest.generation, 1);
    verify(&d).unwrap();
    // A replaced mail key.
    write_private(&d.join("keys/mail.key"), hex::encode([7u8; 32]).as_bytes()).unwrap();
    assert!(matches!(verify(&d), Err(CustodyError::ReplacedKey { .. })));
    std::fs::remove_file(d.join("keys/mail.key")).unwrap();
    assert!(matches!(verify(&d), Err(CustodyError::MissingKey { .. })));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Turns a custody's key files into the hex form Grid wrote before.
fn as_hex(d: &Path) {
    for (file, kind) in KEY_FILES {
        let path = d.join(KEYS_DIR).join(file);
        let (secret, _) = read_key(&path, kind, None).unwrap();
        write_private(&path, hex::encode(*secret).as_bytes()).unwrap();
    }
}

fn openssl_reads(path: &Path) -> Result<(), String> {
    let output = std::process::Command::new("openssl")
        .args(["pkey", "-noout", "-in"])
        .arg(path)
        .output()
        .expect("openssl is installed");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn created_keys_are_pem_pkcs8_that_openssl_reads() {
    let d = dir("pem");
    create(&d).unwrap();
    assert_eq!(legacy_key_files(&d).unwrap(), Vec::<String>::new());
    for (file, _) in KEY_FILES {
        let path = d.join(KEYS_DIR).join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{file}");
        openssl_reads(&path).unwrap_or_else(|e| panic!("openssl refuses {file}: {e}"));
    }
    // A rotated signing key is PEM too.
    rotate(
        &d,
        Rotating::Signing,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    openssl_reads(&d.join(KEYS_DIR).join(SIGNING_KEY_FILE)).unwrap();
    assert_eq!(legacy_key_files(&d).unwrap(), Vec::<String>::new());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hex_keys_still_verify_and_rewrite_as_pem_keeps_every_fingerprint() {
    let d = dir("hex");
    let manifest = create(&d).unwrap();
    as_hex(&d);
    assert!(openssl_reads(&d.join(KEYS_DIR).join(TLS_KEY_FILE)).is_err());
    let before = verify(&d).unwrap();
    assert_eq!(
        before.manifest(),
        manifest,
        "a hex installation still verifies"
    );
    let tls_before = tls_secret_for(&d, &super::manifest(&d).unwrap().tls).unwrap();
    assert_eq!(
        legacy_key_files(&d).unwrap(),
        ["signing.key", "mail.key", "tls.key"]
    );
    assert_eq!(
        rewrite_as_pem(&d).unwrap(),
        ["signing.key", "mail.key", "tls.key"]
    );
    assert_eq!(legacy_key_files(&d).unwrap(), Vec::<String>::new());
    let after = verify(&d).unwrap();
    assert_eq!(after.manifest(), manifest, "fingerprints unchanged");
    assert_eq!(
        after.mail_public().as_bytes(),
        before.mail_public().as_bytes()
    );
    assert_eq!(
        tls_secret_for(&d, &super::manifest(&d).unwrap().tls).unwrap(),
        tls_before,
        "the TLS identity unchanged"
    );
    let (generation, signature) = after.sign(b"m");
    assert!(verify_signature(&manifest, generation, b"m", &signature));
    for (file, _) in KEY_FILES {
        let path = d.join(KEYS_DIR).join(file);
        openssl_reads(&path).unwrap_or_else(|e| panic!("openssl refuses {file}: {e}"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    assert_eq!(
        rewrite_as_pem(&d).unwrap(),
        Vec::<String>::new(),
        "idempotent"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn rewrite_refuses_weak_permissions_and_replaced_keys_rewriting_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let d = dir("rewrite-refusals");
    create(&d).unwrap();
    as_hex(&d);
    let signing = d.join(KEYS_DIR).join(SIGNING_KEY_FILE);
    std::fs::set_permissions(&signing, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        rewrite_as_pem(&d),
        Err(CustodyError::Private(
            crate::store::PrivateDirError::WeakPermissions { .. }
        ))
    ));
    let keys = d.join(KEYS_DIR);
    assert!(
        crate::store::ensure_private_dir(&keys).is_err(),
        "a host refuses too"
    );
    std::fs::set_permissions(&signing, std::fs::Permissions::from_mode(0o600)).unwrap();
    crate::store::ensure_private_dir(&keys).unwrap();
    // A replaced key: nothing is rewritten, the hex files stay as they were.
    write_private(
        &d.join(KEYS_DIR).join(MAIL_KEY_FILE),
        hex::encode([9u8; 32]).as_bytes(),
    )
    .unwrap();
    assert!(matches!(
        rewrite_as_pem(&d),
        Err(CustodyError::ReplacedKey { .. })
    ));
    assert_eq!(legacy_key_files(&d).unwrap().len(), 3);
    // The same with weak permissions on a PEM key: a host still refuses it.
    let pem = dir("pem-weak");
    create(&pem).unwrap();
    let tls = pem.join(KEYS_DIR).join(TLS_KEY_FILE);
    std::fs::set_permissions(&tls, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(crate::store::ensure_private_dir(&pem.join(KEYS_DIR)).is_err());
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&pem).unwrap();
}

#[test]
fn rotation_keeps_old_signatures_verifying_and_never_goes_back() {
    let d = dir("rotate");
    create(&d).unwrap();
    let before = verify(&d).unwrap();
    let (generation, signature) = before.sign(b"grant 1");
    let manifest = rotate(
        &d,
        Rotating::Signing,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    assert_eq!(manifest.generation, 2);
    assert_eq!(manifest.retired.len(), 1);
    let after = verify(&d).unwrap();
    assert!(verify_signature(
        &manifest, generation, b"grant 1", &signature
    ));
    assert!(!verify_signature(
        &manifest, generation, b"grant 2", &signature
    ));
    let (g2, s2) = after.sign(b"grant 2");
    assert_eq!(g2, 2);
    assert!(verify_signature(&manifest, 2, b"grant 2", &s2));
    // The retired key does not verify new work under the new generation.
    assert!(!verify_signature(&manifest, 2, b"grant 1", &signature));
    assert!(matches!(
        rotate(
            &d,
            Rotating::Signing,
            1,
            None,
            &crate::store::Failpoints::default()
        ),
        Err(CustodyError::GenerationNotGrowing { .. })
    ));
    std::fs::remove_dir_all(&d).unwrap();
}

/// The two states a crash in a rotation can leave (rotation.rs): the host opens
/// either way, with the old generation or the new, never a hand fix — and a key
/// that is neither is still refused.
#[test]
fn an_interrupted_rotation_completes_or_keeps_the_old_generation() {
    let keys = |d: &Path| d.join(KEYS_DIR);
    let next = |d: &Path| keys(d).join(format!("{SIGNING_KEY_FILE}.next"));
    // Crashed before the manifest: the staged key is discarded.
    let d = dir("rotate-before-manifest");
    create(&d).unwrap();
    write_key(&next(&d), KeyKind::Ed25519, &random_secret().unwrap()).unwrap();
    let done = finish_rotation(&d, None).unwrap().join("; ");
    assert!(done.contains("generation 1 kept"), "{done}");
    assert!(!next(&d).exists());
    assert_eq!(verify(&d).unwrap().generation(), 1);
    assert!(
        finish_rotation(&d, None).unwrap().is_empty(),
        "nothing under way"
    );
    std::fs::remove_dir_all(&d).unwrap();
    // Crashed before the rename: the manifest names the staged key, the old one is
    // in place — the rotation completes.
    let d = dir("rotate-before-rename");
    create(&d).unwrap();
    let old = std::fs::read(keys(&d).join(SIGNING_KEY_FILE)).unwrap();
    let manifest = rotate(
        &d,
        Rotating::Signing,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    std::fs::rename(keys(&d).join(SIGNING_KEY_FILE), next(&d)).unwrap();
    write_private(&keys(&d).join(SIGNING_KEY_FILE), &old).unwrap();
    assert!(matches!(verify(&d), Err(CustodyError::ReplacedKey { .. })));
    let done = finish_rotation(&d, None).unwrap().join("; ");
    assert!(done.contains("generation 2"), "{done}");
    assert_eq!(verify(&d).unwrap().manifest(), manifest);
    // A signing key that is neither the retired nor the new one: left for verify
    // to refuse.
    write_key(&next(&d), KeyKind::Ed25519, &random_secret().unwrap()).unwrap();
    write_key(
        &keys(&d).join(SIGNING_KEY_FILE),
        KeyKind::Ed25519,
        &random_secret().unwrap(),
    )
    .unwrap();
    assert!(finish_rotation(&d, None).unwrap().is_empty());
    assert!(next(&d).exists(), "untouched");
    assert!(matches!(verify(&d), Err(CustodyError::ReplacedKey { .. })));
    std::fs::remove_dir_all(&d).unwrap();
}

fn seal_to(public: &MailPublicKey, value: f64) -> seal::Sealed {
    seal::seal_value(public, "r", "m", 1, value).unwrap()
}

fn open_with(custody: &Custody, sealed: &seal::Sealed) -> Result<f64, seal::SealError> {
    custody.open_sealed(|secret| seal::open_value(secret, "r", "m", 1, sealed))
}

/// The mail key rotates on its own generation: what was sealed to the old key still
/// opens (open-only), new work is sealed to the new one, and every clone of the
/// custody (each room holds one) uses the new keys once the host installs them.
#[test]
fn mail_rotation_keeps_old_values_opening_and_reaches_every_clone() {
    let d = dir("rotate-mail");
    create(&d).unwrap();
    let custody = verify(&d).unwrap();
    let room = custody.clone();
    let old = seal_to(&custody.mail_public(), 1.5);
    let manifest = rotate(
        &d,
        Rotating::Mail,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    assert_eq!((manifest.generation, manifest.mail_generation), (1, 2));
    assert_eq!(manifest.retired_mail[0].generation, 1);
    assert!(keys_dir(&d).join(retired_mail_file(1)).exists());
    let rotated = verify(&d).unwrap();
    assert_ne!(rotated.mail_public(), custody.mail_public());
    let new = seal_to(&rotated.mail_public(), 2.5);
    // Before the host installs the rotation, the room cannot open the new value.
    assert!(open_with(&room, &new).is_err());
    custody.replace(rotated);
    assert_eq!(room.manifest(), manifest, "the clone sees the rotation");
    assert_eq!(open_with(&room, &old).unwrap(), 1.5, "open-only");
    assert_eq!(open_with(&room, &new).unwrap(), 2.5);
    // A signing rotation reaches the clone too; the mail generation stays.
    let signing = rotate(
        &d,
        Rotating::Signing,
        3,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    custody.replace(verify(&d).unwrap());
    assert_eq!(room.sign(b"x").0, 3);
    assert_eq!(signing.mail_generation, 2);
    assert!(
        signing.extends(&manifest),
        "a later state extends an earlier one"
    );
    assert!(!manifest.extends(&signing), "never an earlier one");
    assert!(
        !manifest.extends(&create_other("other")),
        "nor another identity"
    );
    assert!(matches!(
        rotate(
            &d,
            Rotating::Mail,
            1,
            None,
            &crate::store::Failpoints::default()
        ),
        Err(CustodyError::GenerationNotGrowing { key: "mail", .. })
    ));
    // A retired mail secret replaced: refused by name, like any key.
    write_key(
        &keys_dir(&d).join(retired_mail_file(1)),
        KeyKind::X25519,
        &random_secret().unwrap(),
    )
    .unwrap();
    match verify(&d) {
        Err(CustodyError::ReplacedKey { path, .. }) => {
            assert!(path.ends_with("mail.key.1"), "{}", path.display())
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&d).unwrap();
}

fn keys_dir(d: &Path) -> PathBuf {
    d.join(KEYS_DIR)
}

/// A manifest of a custody of its own (for `extends`: another identity).
fn create_other(name: &str) -> Manifest {
    let d = dir(name);
    let m = create(&d).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
    m
}

/// Interrupted mail rotations: before the manifest, the staged key and the copy of
/// the old secret go and generation 1 stays; before the rename, it completes and
/// the old secret stays open-only.
#[test]
fn an_interrupted_mail_rotation_completes_or_keeps_the_old_generation() {
    let next = |d: &Path| keys_dir(d).join(format!("{MAIL_KEY_FILE}.next"));
    let d = dir("rotate-mail-before-manifest");
    let created = create(&d).unwrap();
    write_key(&next(&d), KeyKind::X25519, &random_secret().unwrap()).unwrap();
    let old = std::fs::read(keys_dir(&d).join(MAIL_KEY_FILE)).unwrap();
    write_private(&keys_dir(&d).join(retired_mail_file(1)), &old).unwrap();
    let done = finish_rotation(&d, None).unwrap().join("; ");
    assert!(done.contains("mail key: generation 1 kept"), "{done}");
    assert!(!next(&d).exists() && !keys_dir(&d).join(retired_mail_file(1)).exists());
    assert_eq!(verify(&d).unwrap().manifest(), created);
    std::fs::remove_dir_all(&d).unwrap();

    let d = dir("rotate-mail-before-rename");
    create(&d).unwrap();
    let custody = verify(&d).unwrap();
    let sealed = seal_to(&custody.mail_public(), 4.0);
    let old = std::fs::read(keys_dir(&d).join(MAIL_KEY_FILE)).unwrap();
    let manifest = rotate(
        &d,
        Rotating::Mail,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    std::fs::rename(keys_dir(&d).join(MAIL_KEY_FILE), next(&d)).unwrap();
    write_private(&keys_dir(&d).join(MAIL_KEY_FILE), &old).unwrap();
    let done = finish_rotation(&d, None).unwrap().join("; ");
    assert!(done.contains("mail key to generation 2"), "{done}");
    let rotated = verify(&d).unwrap();
    assert_eq!(rotated.manifest(), manifest);
    assert_eq!(open_with(&rotated, &sealed).unwrap(), 4.0);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Peers' keys learned through a membership (book.rs): a later state of the same
/// custody is used; one that does not extend what was recorded is ignored.
#[test]
fn peers_rotated_keys_are_learned_and_replaced_identities_are_not() {
    let me = dir("book-me");
    create(&me).unwrap();
    let custody = verify(&me).unwrap();
    let peer = dir("book-peer");
    let recorded = create(&peer).unwrap();
    assert_eq!(
        custody.peer_keys("peer", &recorded),
        recorded,
        "nothing published"
    );
    let rotated = rotate(
        &peer,
        Rotating::Mail,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    book::write(&me, "ops", "peer", &rotated).unwrap();
    assert_eq!(custody.peer_keys("peer", &recorded), rotated);
    assert_eq!(book::held(&me, "ops").get("peer"), Some(&rotated));
    // A replaced identity published under the peer's name: not learned.
    let other = create_other("book-other");
    book::write(&me, "ops", "peer", &other).unwrap();
    assert_eq!(custody.peer_keys("peer", &recorded), recorded);
    // An entry naming another participant is refused by name.
    std::fs::copy(
        me.join("memberships/ops/keys/peer.toml"),
        me.join("memberships/ops/keys/third.toml"),
    )
    .unwrap();
    assert!(book::read(&me, "ops", "third").is_err());
    std::fs::remove_dir_all(&me).unwrap();
    std::fs::remove_dir_all(&peer).unwrap();
}

/// The TLS key rotates on its own generation: the old secret serves what still
/// certifies it (`tls_secret_for`) until every certificate names the new one, then it
/// is removed and never offered again; a key no certificate of this custody names is
/// refused.
#[test]
fn tls_rotation_serves_the_certified_key_until_it_is_forgotten() {
    let d = dir("rotate-tls");
    let created = create(&d).unwrap();
    let old = tls_secret_for(&d, &super::manifest(&d).unwrap().tls).unwrap();
    let manifest = rotate(
        &d,
        Rotating::Tls,
        2,
        None,
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    assert_eq!((manifest.generation, manifest.tls_generation), (1, 2));
    assert_eq!(manifest.retired_tls[0].tls, created.tls);
    assert_eq!(
        tls_secret_for(&d, &created.tls).unwrap(),
        old,
        "still certified"
    );
    assert_ne!(tls_secret_for(&d, &manifest.tls).unwrap(), old);
    assert!(tls_secret_for(&d, "ed25519:00").is_err(), "another key");
    // Still certified somewhere: kept.
    assert!(
        forget_retired_tls(&d, std::slice::from_ref(&created.tls))
            .unwrap()
            .is_empty()
    );
    // Every certificate names the new key: the old secret goes, once.
    assert_eq!(
        forget_retired_tls(&d, std::slice::from_ref(&manifest.tls)).unwrap(),
        vec![retired_tls_file(1)]
    );
    assert!(forget_retired_tls(&d, &[]).unwrap().is_empty());
    assert!(
        tls_secret_for(&d, &created.tls).is_err(),
        "never offered again"
    );
    assert_eq!(
        verify(&d).unwrap().manifest(),
        manifest,
        "the custody verifies without it"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Locked custody (docs/custody.md, "Locked custody"): the evidence keys encrypted at
/// rest, opened locked without the passphrase, unlocked only with the right one; an
/// unencrypted key in a locked custody refused; rotation keeps the keys encrypted and
/// one a crash interrupted finishes at unlock.
#[test]
fn a_locked_custody_opens_locked_and_unlocks_with_its_passphrase_only() {
    const PASS: &[u8] = b"correct horse battery staple";
    let d = dir("locked");
    let manifest = create(&d).unwrap();
    let custody = verify(&d).unwrap();
    assert!(!custody.is_locked() && !custody.is_encrypted());
    assert!(matches!(
        custody.lock(b"short", &crate::store::Failpoints::default()),
        Err(CustodyError::Passphrase(why)) if why.contains("CUSTODY_PASSPHRASE_BYTES_MIN")
    ));
    let rewritten = custody
        .lock(PASS, &crate::store::Failpoints::default())
        .unwrap();
    assert_eq!(rewritten, vec![SIGNING_KEY_FILE, MAIL_KEY_FILE]);
    // Still unlocked in memory, now encrypted at rest; the fingerprints unchanged.
    assert!(!custody.is_locked() && custody.is_encrypted());
    assert_eq!(custody.manifest(), manifest);
    let (generation, signature) = custody.try_sign(b"after the lock").unwrap();
    for file in [SIGNING_KEY_FILE, MAIL_KEY_FILE] {
        let text = std::fs::read_to_string(d.join(KEYS_DIR).join(file)).unwrap();
        assert!(keyfile::is_encrypted(&text), "{file}");
    }
    // The TLS key stays readable: a locked host answers reads over TLS.
    assert!(
        std::fs::read_to_string(d.join(KEYS_DIR).join(TLS_KEY_FILE))
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    // A start without the passphrase: locked, signing refused, the manifest readable.
    let locked = verify(&d).unwrap();
    assert!(locked.is_locked());
    assert_eq!(locked.manifest(), manifest);
    assert!(matches!(
        locked.try_sign(b"x"),
        Err(CustodyError::Locked { .. })
    ));
    assert!(matches!(
        rotate(
            &d,
            Rotating::Signing,
            2,
            None,
            &crate::store::Failpoints::default()
        ),
        Err(CustodyError::Locked { .. })
    ));
    // A wrong passphrase changes nothing.
    assert!(matches!(
        locked.unlock(b"correct horse battery stapler"),
        Err(CustodyError::WrongPassphrase { path }) if path.ends_with(SIGNING_KEY_FILE)
    ));
    assert!(locked.is_locked());
    locked.unlock(PASS).unwrap();
    assert!(!locked.is_locked());
    assert!(verify_signature(
        &manifest,
        generation,
        b"after the lock",
        &signature
    ));
    let (_, again) = locked.try_sign(b"after the unlock").unwrap();
    assert!(verify_signature(&manifest, 1, b"after the unlock", &again));
    // A rotation of a locked custody writes its new keys encrypted; the old mail
    // secret kept open-only is encrypted too.
    for key in [Rotating::Signing, Rotating::Mail] {
        rotate(&d, key, 2, Some(PASS), &crate::store::Failpoints::default()).unwrap();
    }
    for file in [SIGNING_KEY_FILE, MAIL_KEY_FILE, "mail.key.1"] {
        let text = std::fs::read_to_string(d.join(KEYS_DIR).join(file)).unwrap();
        assert!(keyfile::is_encrypted(&text), "{file}");
    }
    let rotated = open(&d, Some(PASS)).unwrap();
    assert_eq!(
        (rotated.generation(), rotated.manifest().mail_generation),
        (2, 2)
    );
    // A rotation interrupted before its rename waits for the passphrase, then completes.
    let next = d.join(KEYS_DIR).join(format!("{SIGNING_KEY_FILE}.next"));
    let old = std::fs::read(d.join(KEYS_DIR).join(SIGNING_KEY_FILE)).unwrap();
    let third = rotate(
        &d,
        Rotating::Signing,
        3,
        Some(PASS),
        &crate::store::Failpoints::default(),
    )
    .unwrap();
    std::fs::rename(d.join(KEYS_DIR).join(SIGNING_KEY_FILE), &next).unwrap();
    write_private(&d.join(KEYS_DIR).join(SIGNING_KEY_FILE), &old).unwrap();
    let waiting = finish_rotation(&d, None).unwrap().join("; ");
    assert!(
        waiting.contains("finishes when the custody is unlocked"),
        "{waiting}"
    );
    let locked = verify(&d).unwrap();
    assert!(locked.is_locked());
    let done = locked.unlock(PASS).unwrap().join("; ");
    assert!(done.contains("generation 3"), "{done}");
    assert_eq!(locked.manifest(), third);
    // A weak key file: the signing key put back unencrypted in a locked custody.
    let secret = read_secret(
        &d.join(KEYS_DIR).join(SIGNING_KEY_FILE),
        KeyKind::Ed25519,
        Some(PASS),
    )
    .unwrap();
    write_key(
        &d.join(KEYS_DIR).join(SIGNING_KEY_FILE),
        KeyKind::Ed25519,
        &secret,
    )
    .unwrap();
    assert!(matches!(
        verify(&d),
        Err(CustodyError::WeakKey { path, reason })
            if path.ends_with(SIGNING_KEY_FILE) && reason.contains("unencrypted")
    ));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A lock (here a change of passphrase) a crash interrupts is all or nothing
/// (custody/lock.rs): staged keys without the commit are discarded, the old passphrase
/// still unlocks; after the commit the open completes the renames, the new one does.
#[test]
fn an_interrupted_lock_is_discarded_before_its_commit_and_completed_after() {
    const OLD: &[u8] = b"correct horse battery staple";
    const NEW: &[u8] = b"another horse battery staple";
    let d = dir("relock");
    let manifest = create(&d).unwrap();
    verify(&d)
        .unwrap()
        .lock(OLD, &crate::store::Failpoints::default())
        .unwrap();
    let keys = d.join(KEYS_DIR);
    let stage = |d: &Path| {
        for (file, kind) in [
            (SIGNING_KEY_FILE, KeyKind::Ed25519),
            (MAIL_KEY_FILE, KeyKind::X25519),
        ] {
            let secret = read_secret(&keys.join(file), kind, Some(OLD)).unwrap();
            let staged = d.join(KEYS_DIR).join(format!("{file}.relock"));
            write_key_as(&staged, kind, &secret, Some(NEW)).unwrap();
        }
    };
    // Stopped before the commit: discarded.
    stage(&d);
    let done = finish_lock(&d).unwrap().unwrap();
    assert!(done.contains("before its commit"), "{done}");
    assert!(!keys.join("signing.key.relock").exists());
    assert!(matches!(
        open(&d, Some(NEW)),
        Err(CustodyError::WrongPassphrase { .. })
    ));
    assert_eq!(open(&d, Some(OLD)).unwrap().manifest(), manifest);
    assert_eq!(finish_lock(&d).unwrap(), None, "nothing under way");
    // Stopped after the commit, the signing key renamed, the mail key not: completed.
    stage(&d);
    write_private(&keys.join("relock"), b"staged keys replace the keys\n").unwrap();
    std::fs::rename(keys.join("signing.key.relock"), keys.join(SIGNING_KEY_FILE)).unwrap();
    let done = finish_lock(&d).unwrap().unwrap();
    assert!(done.contains("after its commit"), "{done}");
    assert!(!keys.join("relock").exists() && !keys.join("mail.key.relock").exists());
    assert!(matches!(
        open(&d, Some(OLD)),
        Err(CustodyError::WrongPassphrase { .. })
    ));
    let unlocked = open(&d, Some(NEW)).unwrap();
    assert!(!unlocked.is_locked() && unlocked.is_encrypted());
    assert_eq!(unlocked.manifest(), manifest);
    std::fs::remove_dir_all(&d).unwrap();
}
