//! Operator mutual TLS of the control plane (issue 36, docs/control-plane.md,
//! "Operators off loopback"): a real gridd serving two `control` lines with
//! `operators=`, reached with curl (a real TLS client, as an operator would) holding
//! certificates made here. Checked: the reconciler refuses a page key readable by
//! others and writes nothing; it copies the files privately into the installation
//! with their digest in host.toml; the page answers only a client certificate of the
//! operators' authority (none, a stranger's, or plain HTTP get no page); it presents
//! `certificate=` (by IP and by its DNS name) or, without it, the host's participant
//! certificate; forms need an `https://` origin; copies damaged while gridd is down
//! refuse its start by name, and the plan writes them again.
//!
//! Needs `curl` (installed by `.ci/run` and the README).

use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

mod common;

const PAGE: &str = "127.0.0.1:7712";
const PARTICIPANT_PAGE: &str = "127.0.0.1:7713";

/// A certificate authority: its PEM and what issues with it.
fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let certificate = params.self_signed(&key).unwrap();
    (certificate.pem(), Issuer::new(params, key))
}

/// A certificate issued by `issuer` for `name` (also a DNS name when `dns`), and its
/// key: both PEM.
fn issued(issuer: &Issuer<'static, KeyPair>, name: &str, dns: bool) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let names = if dns {
        vec![name.to_owned()]
    } else {
        Vec::new()
    };
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    if dns {
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
    let certificate = params.signed_by(&key, issuer).unwrap();
    (certificate.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, text: &str, mode: u32) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `curl ARGS… URL` in `dir`: its exit code, and the HTTP status it printed then the
/// body (or its error).
fn curl(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new("curl")
        .current_dir(dir)
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl is installed (.ci/run and the README install it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

fn status_of(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

const ALICE: [&str; 4] = ["--cert", "alice.pem", "--key", "alice-key.pem"];

fn page_url(path: &str) -> String {
    format!("https://{PAGE}{path}")
}

#[test]
fn only_operators_reach_a_control_plane_served_with_operators() {
    let dir = common::work_dir("control-operators");
    let (ops_ca, ops) = authority("ops operators");
    let (page_ca, page) = authority("page authority");
    let (_, stranger) = authority("stranger");
    write(&dir, "ops-ca.pem", &ops_ca, 0o644);
    write(&dir, "page-ca.pem", &page_ca, 0o644);
    let (certificate, key) = issued(&page, "control.test", true);
    write(&dir, "page/control.pem", &certificate, 0o644);
    // Readable by others first: refused.
    write(&dir, "page/control-key.pem", &key, 0o644);
    for (who, issuer) in [("alice", &ops), ("mallory", &stranger)] {
        let (certificate, key) = issued(issuer, who, false);
        write(&dir, &format!("{who}.pem"), &certificate, 0o644);
        write(&dir, &format!("{who}-key.pem"), &key, 0o600);
    }
    std::fs::write(
        dir.join("t.kdl"),
        format!(
            "grid version=1\nmembership ops\n\
             host hq listen=\"127.0.0.1:7711\" {{ member ops; profiles transport control\n\
             control listen=\"{PAGE}\" operators=\"ops-ca.pem\" certificate=\"page/control.pem\" key=\"page/control-key.pem\"\n\
             control listen=\"{PARTICIPANT_PAGE}\" operators=\"ops-ca.pem\"; }}\n"
        ),
    )
    .unwrap();
    let host_dir = dir.join("grid-state/hosts/hq");

    // A page key readable by others: said, naming the file, and nothing installed.
    let (_, text) = common::gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert!(
        text.contains("control-key.pem") && text.contains("mode 644"),
        "{text}"
    );
    assert!(!host_dir.join("host.toml").exists(), "{text}");

    std::fs::set_permissions(
        dir.join("page/control-key.pem"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (code, text) = common::gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert!(matches!(code, Some(0 | 5)), "{text}");
    // Copied privately, their digest in host.toml.
    let host_toml = std::fs::read_to_string(host_dir.join("host.toml")).unwrap();
    assert_eq!(host_toml.matches("digest = ").count(), 2, "{host_toml}");
    let copies = host_dir.join("control/127-0-0-1-7712");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&copies), 0o700);
    for file in ["operators.pem", "certificate.pem", "key.pem"] {
        assert_eq!(mode(&copies.join(file)), 0o600, "{file}");
    }
    assert_eq!(
        std::fs::read_to_string(copies.join("key.pem")).unwrap(),
        key,
        "the page's key copied as it is"
    );
    assert!(!host_dir.join("control/127-0-0-1-7713/key.pem").exists());

    let mut hq = common::start_gridd(&host_dir, &dir.join("hq.log")).unwrap();

    // An operator of the operators' authority: the page, by address and by the DNS
    // name its certificate carries.
    let overview = page_url("/panel/overview");
    let (code, text) = curl(
        &dir,
        &[&["--cacert", "page-ca.pem"][..], &ALICE, &[&overview]].concat(),
    );
    assert_eq!((code, status_of(&text)), (Some(0), "200"), "{text}");
    assert!(text.contains("hq"), "{text}");
    let resolve = "control.test:7712:127.0.0.1";
    let (code, text) = curl(
        &dir,
        &[
            &["--cacert", "page-ca.pem", "--resolve", resolve][..],
            &ALICE,
            &["https://control.test:7712/panel/models"],
        ]
        .concat(),
    );
    assert_eq!((code, status_of(&text)), (Some(0), "200"), "{text}");

    // No client certificate, a stranger's, or plain HTTP: no page.
    for (what, args) in [
        ("no certificate", vec!["--cacert", "page-ca.pem", &overview]),
        (
            "a stranger's certificate",
            vec![
                "--cacert",
                "page-ca.pem",
                "--cert",
                "mallory.pem",
                "--key",
                "mallory-key.pem",
                &overview,
            ],
        ),
    ] {
        let (code, text) = curl(&dir, &args);
        assert_ne!(code, Some(0), "{what}: {text}");
        assert!(!text.contains("<html"), "{what}: {text}");
    }
    let (code, text) = curl(&dir, &[&format!("http://{PAGE}/panel/overview")]);
    assert!(
        code != Some(0) || status_of(&text) == "000",
        "plain HTTP: {text}"
    );
    assert!(!text.contains("<html"), "plain HTTP: {text}");

    // Without `certificate=`, the host's participant certificate: trusted with the
    // membership's authority, by the participant's server name.
    let (code, text) = curl(
        &dir,
        &[
            &[
                "--cacert",
                "grid-state/memberships/ops/ca.pem",
                "--resolve",
                "hq.ops.grid:7713:127.0.0.1",
            ][..],
            &ALICE,
            &["https://hq.ops.grid:7713/panel/overview"],
        ]
        .concat(),
    );
    assert_eq!((code, status_of(&text)), (Some(0), "200"), "{text}");

    // A form: its origin is the page's https:// one.
    let (_, page_text) = curl(
        &dir,
        &[&["--cacert", "page-ca.pem"][..], &ALICE, &[&overview]].concat(),
    );
    let csrf = page_text
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the page carries its CSRF token")
        .to_owned();
    let form = format!("csrf={csrf}&owner=hq&part=observation&back=/panel/overview&asker=");
    let post = |origin: &str| {
        curl(
            &dir,
            &[
                &["--cacert", "page-ca.pem"][..],
                &ALICE,
                &[
                    "-H",
                    &format!("Origin: {origin}"),
                    "--data",
                    &form,
                    &page_url("/inspect"),
                ],
            ]
            .concat(),
        )
    };
    let (_, text) = post(&format!("http://{PAGE}"));
    assert_eq!(status_of(&text), "403", "an http:// origin: {text}");
    let (_, text) = post(&format!("https://{PAGE}"));
    assert_eq!(status_of(&text), "303", "{text}");
    let (_, text) = curl(
        &dir,
        &[&["--cacert", "page-ca.pem"][..], &ALICE, &[&overview]].concat(),
    );
    assert!(text.contains("retained"), "inspected: {text}");
    let log = std::fs::read_to_string(dir.join("hq.log")).unwrap();
    assert!(
        log.contains("a form from an operator") && log.contains("alice"),
        "the operator named in the log: {log}"
    );

    // The copies damaged while gridd is down: its start refused by name; the plan
    // writes them again.
    let _ = hq.0.kill();
    let _ = hq.0.wait();
    let mallory = std::fs::read_to_string(dir.join("mallory.pem")).unwrap();
    common_write_private(&copies.join("certificate.pem"), &mallory);
    let refused = common::start_gridd(&host_dir, &dir.join("hq-2.log"))
        .err()
        .expect("damaged copies refuse the start");
    assert!(
        refused.contains("control listen=\"127.0.0.1:7712\"") && refused.contains("digest"),
        "{refused}"
    );
    let (_, plan) = common::gridctl_code(&dir, &["plan", "t.kdl"]);
    assert!(
        plan.contains("~ host hq") && plan.contains("127-0-0-1-7712"),
        "{plan}"
    );
    // Written again; hq itself is down (attention: not running).
    let (code, text) = common::gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("~ host hq @ hq: succeeded"), "{text}");
    let mut hq = common::start_gridd(&host_dir, &dir.join("hq-3.log")).unwrap();
    let (code, text) = curl(
        &dir,
        &[&["--cacert", "page-ca.pem"][..], &ALICE, &[&overview]].concat(),
    );
    assert_eq!((code, status_of(&text)), (Some(0), "200"), "{text}");
    // What the page retained of hq before the restarts was kept, signed, and reads
    // so — with its age — never as a fresh inspection.
    assert!(
        text.contains("data-state=\"kept\"")
            && text.contains("Retained before this host restarted"),
        "{text}"
    );
    let record = host_dir.join("control/retained/6871.json");
    assert_eq!(mode(&record), 0o600);

    // The kept record changed on disk while hq is down: refused by name, nothing of
    // it shown, the page served.
    let _ = hq.0.kill();
    let _ = hq.0.wait();
    let text = std::fs::read_to_string(&record).unwrap();
    let changed = text.replacen("\\\"host\\\":\\\"hq\\\"", "\\\"host\\\":\\\"hx\\\"", 1);
    assert_ne!(changed, text, "{text}");
    common_write_private(&record, &changed);
    let mut hq = common::start_gridd(&host_dir, &dir.join("hq-4.log")).unwrap();
    let get = || {
        curl(
            &dir,
            &[&["--cacert", "page-ca.pem"][..], &ALICE, &[&overview]].concat(),
        )
    };
    let (code, text) = get();
    assert_eq!((code, status_of(&text)), (Some(0), "200"), "{text}");
    assert!(
        text.contains("data-state=\"damaged\"") && text.contains("does not verify"),
        "{text}"
    );

    // hq inspected again (its record kept anew), its custody locked, hq restarted: the
    // page serves what it kept, verified with hq's public keys, and asks nobody.
    let inspect = |page: &str| {
        let csrf = csrf_of(page);
        let form = format!("csrf={csrf}&owner=hq&part=observation&back=/panel/overview&asker=");
        let origin = format!("Origin: https://{PAGE}");
        curl(
            &dir,
            &[
                &["--cacert", "page-ca.pem"][..],
                &ALICE,
                &["-H", &origin, "--data", &form, &page_url("/inspect")],
            ]
            .concat(),
        )
    };
    let (_, posted) = inspect(&text);
    assert_eq!(status_of(&posted), "303", "{posted}");
    std::fs::write(dir.join("passphrase"), "a passphrase of the operator\n").unwrap();
    let lock = ["custody", "lock", "hq", "--passphrase-file", "passphrase"];
    let (code, said) = common::gridctl_code(&dir, &lock);
    assert_eq!(code, Some(0), "{said}");
    let _ = hq.0.kill();
    let _ = hq.0.wait();
    let _hq = common::start_gridd(&host_dir, &dir.join("hq-5.log")).unwrap();
    let (code, text) = get();
    assert_eq!((code, status_of(&text)), (Some(0), "200"), "{text}");
    assert!(
        text.contains("custody is locked") && text.contains("data-state=\"kept\""),
        "{text}"
    );
    let (_, posted) = inspect(&text);
    assert_eq!(status_of(&posted), "303", "{posted}");
    let (_, text) = get();
    assert!(
        text.contains("data-state=\"unreachable\"") && text.contains("nothing was sent"),
        "an inspection while locked is refused: {text}"
    );
    // Unlocked: the whole page takes the same address (bounded wait).
    let unlock = ["custody", "unlock", "hq", "--passphrase-file", "passphrase"];
    let (code, said) = common::gridctl_code(&dir, &unlock);
    assert_eq!(code, Some(0), "{said}");
    let started = std::time::Instant::now();
    loop {
        let (_, text) = get();
        if status_of(&text) == "200" && !text.contains("custody is locked") {
            break;
        }
        assert!(
            started.elapsed() < common::READY_TIMEOUT,
            "the whole page after the unlock: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The CSRF token a page of the plane carries.
fn csrf_of(page: &str) -> String {
    page.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the page carries its CSRF token")
        .to_owned()
}

/// Overwrites a private copy in place, keeping its mode (damage, not a weakening).
fn common_write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}
